"""The manual's tooling: what renders the generated parts of docs/ from the code."""
