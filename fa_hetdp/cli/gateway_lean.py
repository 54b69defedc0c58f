"""The fleet gateway's lean start: the server without the fa-hetdp library or flwr loaded.

``fa-hetdp fleet-gateway`` checks its settings and the installed flwr's Fleet routes, which
loads flwr and the library (about 190 MB), then replaces itself (``exec``, same process id)
with ``python .../fa_hetdp/cli/gateway_lean.py PACKAGE_DIR SETTINGS_JSON``. This script makes
``fa_hetdp`` a bare package (its ``__init__``, which loads the whole library, is not run) and
serves with :func:`fa_hetdp.cli.gateway.serve_checked`, so the serving process holds only the
gateway's modules, uvicorn and httpx (about 40 MB). It is not meant to be run by hand.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    """Serve with the checked settings ``argv[1]`` (JSON), the package found at ``argv[0]``.

    Returns 130 once interrupted (Ctrl-C, SIGINT), as ``fa-hetdp`` does.
    """
    package_dir, settings_json = argv
    spec = importlib.machinery.ModuleSpec("fa_hetdp", None, is_package=True)
    spec.submodule_search_locations = [package_dir]
    package = types.ModuleType("fa_hetdp")
    package.__spec__ = spec
    package.__path__ = [package_dir]
    sys.modules.setdefault("fa_hetdp", package)
    from fa_hetdp.cli.gateway import serve_checked

    try:
        serve_checked(settings_json)
    except KeyboardInterrupt:  # uvicorn stops, then re-raises the SIGINT it caught
        print("fa-hetdp fleet-gateway: interrupted.", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    del sys.path[0]  # the script's own folder, fa_hetdp/cli, is no place to import from
    sys.exit(main(sys.argv[1:]))
