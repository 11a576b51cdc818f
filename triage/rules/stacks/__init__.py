"""Rules that read live py-spy stacks; each module is named by its rule ID."""
