"""The ``rljob`` command: the top layer. It imports the API (``rljob.api``) and, per subcommand and only
when run, the operator or the trainer; nothing below imports it."""
