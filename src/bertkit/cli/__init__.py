"""Command-line interface: one registry of subcommands (see ``bertkit.cli.main.COMMANDS``)."""
