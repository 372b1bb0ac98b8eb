"""The fleet (issue 41): the catalog of GPU classes, and how a worker finds its class and host."""
