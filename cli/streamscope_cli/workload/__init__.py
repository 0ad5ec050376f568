"""The demo workload: a simulated serving engine, a network impairment proxy, scenarios and ground truth."""
