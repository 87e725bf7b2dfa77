"""The fault suite (``make faults``): each scenario on real processes, counted."""
