"""What an entry point imports first and its interpreter cannot find, without running it.

Run by the process's own interpreter, which need not have the launcher: the preflight
(launcher.node.preflight) hands this file's text to `python -c`, with the entry as
`SCRIPT` or `-m MODULE`. The module's file is found as `python -m` finds it (a package's
`__main__`), its parent packages found, never imported; the file's top-level `import` and
`from` statements are read with `ast` and each module looked up the same way, on the path
the entry will have (a script's folder first, the working directory for `-m`). Prints JSON:
{"file": path or null, "missing": [[module, line], ...]}. Standard library only.
"""

import ast
import importlib.machinery
import importlib.util
import json
import os
import sys


def find(name):
    """The spec of module `name`, its packages located but not executed; None: not there.
    Below a plain module (`os.path`) nothing can be told without running it: that module's
    spec."""
    parts = name.split(".")
    spec, where = None, None
    for i in range(len(parts)):
        full = ".".join(parts[: i + 1])
        try:
            spec = (
                importlib.util.find_spec(full)
                if i == 0
                else importlib.machinery.PathFinder.find_spec(full, where)
            )
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        where = spec.submodule_search_locations
        if where is None:
            return spec
    return spec


def top_imports(tree):
    """(module, line) for each absolute import at the file's top level, in order."""
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module != "__future__"
        ):
            yield node.module, node.lineno


def main(argv):
    if argv[0] == "-m":
        spec = find(argv[1])
        if spec is not None and spec.name != argv[1]:
            spec = None  # a plain module where a package should be
        if spec is not None and spec.submodule_search_locations is not None:
            spec = find(argv[1] + ".__main__")
        if spec is None or not spec.origin or not os.path.isfile(spec.origin):
            return {"file": None, "missing": [[argv[1], 0]] if spec is None else []}
        path = spec.origin
    else:
        path = os.path.abspath(argv[0])
        sys.path[0] = os.path.dirname(path)  # as `python SCRIPT` has it
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return {"file": path, "missing": []}
    missing = [[name, line] for name, line in top_imports(tree) if find(name) is None]
    return {"file": path, "missing": missing}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
