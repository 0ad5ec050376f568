"""Panel definitions, rendered to Grafana dashboards and alert rules and to the local report."""
