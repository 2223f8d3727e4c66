"""The small core every pipeline shares: the words (``vocabulary``), the escaping of foreign
strings (``text``), the errors and their exit codes (``errors``), opening files someone else made
(``safe_read``), the one reduction of the samples (``series``) and the machine's page size
(``system``). Nothing here imports torch, the probe or the report."""
