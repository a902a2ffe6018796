"""The language server: ``frognano serve`` (``app.run_stdio``).  See ``app.py`` for the contract."""
