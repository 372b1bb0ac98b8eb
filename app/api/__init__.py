"""The API process: factory.py builds the app; serve.py runs it under uvicorn, whose HTTP parsing
http_protocol.py bounds; runtime.py holds what the handlers share; deps.py, routing.py and
limits.py check keys, bodies and rates; responses.py the answers routes share; routes/ has one
module per resource; live/ follows jobs as they change (events, places in line, start
estimates, listings); collector.py reads the metrics from Redis."""
