"""A results folder on disk: its writer and reader (``folder``), its schema checked on load
(``schema``), a long run's tables read back in bounded memory (``reduce``). It knows files; it
reads no process."""
