from coord.starter.cli import main

main()
