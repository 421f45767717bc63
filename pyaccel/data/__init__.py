"""Data shipped with pyaccel: the published-speed table ``published.csv`` (a copy of
``bench/published.csv``; a test holds the two equal)."""
