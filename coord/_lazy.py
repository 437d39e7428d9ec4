"""A package's lazy re-exports, named once.

The imports under the package's `if TYPE_CHECKING:` are the one list of what it serves: type
checkers and IDEs read them (`from module import name as name`, the explicit re-export, or
`from module import *` for a module's whole `__all__`), and at run time the same lines, read from
the package's source on first use, say where each name lives. A name is imported from its module
when a script first touches it, so importing the package costs nothing; adding a public name is
one import line."""

import ast
import importlib
import sys
from functools import cached_property
from pathlib import Path
from typing import Any


def typing_imports(source: str) -> list[ast.ImportFrom]:
    """The `from ... import ...` lines of a module's top-level `if TYPE_CHECKING:` block."""
    block = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    return [node for node in block.body if isinstance(node, ast.ImportFrom)]


class LazyExports:
    """The names a package serves, where each lives, and the module hooks that load them."""

    def __init__(self, package: str, file: str) -> None:
        self.package = package
        self.file = Path(file)

    @cached_property
    def imports(self) -> list[ast.ImportFrom]:
        return typing_imports(self.file.read_text())

    @cached_property
    def homes(self) -> dict[str, str]:
        """Each name imported by name, with its module."""
        return {
            alias.asname or alias.name: node.module or ""
            for node in self.imports
            for alias in node.names
            if alias.name != "*"
        }

    @cached_property
    def wholes(self) -> tuple[str, ...]:
        """The modules whose whole `__all__` the package serves (`import *`)."""
        return tuple(
            node.module or "" for node in self.imports if [a.name for a in node.names] == ["*"]
        )

    def names(self) -> list[str]:
        """`__all__`: the wholes' names are known once their modules are imported."""
        whole = (name for module in self.wholes for name in self.whole(module))
        return sorted({*self.homes, *whole})

    @staticmethod
    def whole(module: str) -> list[str]:
        exported: list[str] = importlib.import_module(module).__all__
        return exported

    def home(self, name: str) -> str | None:
        if name in self.homes:
            return self.homes[name]
        if name.startswith("_"):
            return None
        return next((module for module in self.wholes if name in self.whole(module)), None)

    def attribute(self, name: str) -> Any:
        """The module's `__getattr__`: a served name is imported on first use, then kept."""
        if name == "__all__":
            value: Any = self.names()
        elif (module := self.home(name)) is not None:
            value = getattr(importlib.import_module(module), name)
        else:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        vars(sys.modules[self.package])[name] = value
        return value

    def listing(self) -> list[str]:
        """The module's `__dir__`."""
        return sorted({*vars(sys.modules[self.package]), *self.names()})
