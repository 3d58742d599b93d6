"""The ``window-retriever`` command line (private).

``_main``: the entry point, which handles Ctrl-C before anything heavy is imported;
``_parser``: every command and flag; ``_commands``: what each command does (a shell around
the library's functions); ``_terminal``: what they print; ``_interrupt``: Ctrl-C where it is
safe; ``_lock``: one writer per embedded directory.
"""
