"""GPU inventory, flavors and requests (arrive with the requests issue)."""
