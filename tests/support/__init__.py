"""Helper modules shared by several test rooms (imported as ``support.<module>``: tests/ is on
sys.path, as for ``training.helpers``; not named ``helpers``, which ``tests/training/helpers.py``
is when a script puts tests/training first on the path)."""
