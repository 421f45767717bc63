"""``python -m pyaccel``: the same command line as the ``pyaccel`` script."""

from .cli import main

if __name__ == "__main__":
    main()
