"""The command line's commands: one module per command group, each with
``register(subparsers)``; ``cli.app`` loads them by name (``COMMAND_MODULES``).

``init``, ``conversations`` (list, context, transcript, close-tool-calls), ``audit``
(replay, export, verify), ``stats``, ``whatif``, ``rebuild``, ``worker``, ``erase``,
``keys`` (rotate), ``demo``, ``serve``.

May import: the modules of ``cli`` itself (``common``, ``connect``, ``render``,
``signals``, ``catchup``, ``waiting``), the rooms of the layer, the application layer
and the domain. Nothing imports it but ``cli.app``, by name.
"""
