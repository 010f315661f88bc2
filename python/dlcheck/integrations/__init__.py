"""Recording where teams train: `dlcheck.integrations.lightning` (a
PyTorch Lightning callback). Each integration imports its framework only
when it is imported itself, so `import dlcheck` never needs one."""
