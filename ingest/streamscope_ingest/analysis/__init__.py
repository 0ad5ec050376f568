"""What the stored streams mean: stall attribution, quality indices, and scoring against ground truth."""
