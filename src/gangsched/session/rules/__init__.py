"""Rules shared by plugins and actions: gang arithmetic, fair-share figures, job lifecycle
policies and disruption budgets. See ARCHITECTURE.md at the repository root."""
