"""Helper modules shared by several test rooms (imported as ``helpers.<module>``: tests/ is on
sys.path, as for ``training.helpers``)."""
