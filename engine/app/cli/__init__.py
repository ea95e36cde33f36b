"""The ``dltsched`` command line: one module per subcommand, imported when it runs."""
