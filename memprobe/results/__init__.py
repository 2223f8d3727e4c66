"""A results folder on disk: its life and its reading back (``folder``), its files written
atomically and read safely (``files``), the rows gathered from JSON lines into Parquet
(``gather``), its schema checked on load (``schema``), a long run's tables read back in bounded
memory (``reduce``). It knows files; it reads no process."""
