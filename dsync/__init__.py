"""The dsync Python client, for `import dsync` at the top of the source tree.

The client is clients/python/dsync (pip installs it from clients/python).
Here, at the top, `make` builds the extension's library dsync.so, and
Python, whose current directory comes first on sys.path, would take that
for a module named dsync and fail (undefined symbols: it is a server
module).  A package directory is looked for before a module file of the
same name, so this one is found instead, and hands over at once: it loads
clients/python/dsync as the package dsync, under its own file name and
path (dsync.__file__, and dsync.aio, dsync._wire and the others from
there), and puts it in sys.modules in place of itself.  Nothing of this
file stays.  test/version.sh checks it after `make`.
"""

import importlib.util
import os
import sys


def _load_client():
    """Import clients/python/dsync as dsync and put it in sys.modules."""
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    package = os.path.join(top, "clients", "python", "dsync")
    spec = importlib.util.spec_from_file_location(
        __name__, os.path.join(package, "__init__.py"),
        submodule_search_locations=[package])
    module = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[__name__]
        raise


_load_client()
