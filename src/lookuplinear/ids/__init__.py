"""From raw IDs to rows: hashing, ``IdMap``, ``Vocab``."""
