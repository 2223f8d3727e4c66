"""The small core every pipeline shares: the words (``vocabulary``), the escaping of foreign
strings (``text``), the errors and their exit codes (``errors``), opening files someone else made
(``safe_read``) and the one reduction of the samples (``series``). Nothing here imports torch, the
probe or the report."""
