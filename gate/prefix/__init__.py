"""The cross-request block prefix cache, its options, its planted key faults and its worker."""
