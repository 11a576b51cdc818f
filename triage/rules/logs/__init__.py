"""Rules that read rank, launcher and NCCL logs; each module is named by its rule ID."""
