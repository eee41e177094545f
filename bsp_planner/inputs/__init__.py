"""What a user writes or ships, read and checked once: jobs, experiments, workload series, profiles and pair
profiles, the settings loader, run-wide placeholders, program digests and the shipped defaults."""
