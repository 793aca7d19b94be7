"""Run by the interpreter at start-up in processes a test starts with this folder on its
``PYTHONPATH``: holds them at the moment the test names (see ``holding``)."""

import holding

holding.install_from_env()
