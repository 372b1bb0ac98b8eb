"""What follows jobs as they change: events.py hears the job channels, places.py the queues'
moves, estimates.py and eta.py when a queued job should start, listing.py an account's jobs."""
