from bertkit.cli.main import entry

entry()
