"""The whole stack on one machine, for `fairgpu dev`, the benchmarks and the tests: stack.py
starts Redis (redis_server.py, embedded when none is given), the API and workers as processes
(processes.py); fleet.py says which workers (a simulated fleet of classes and hosts, with
--worker); console.py is the `fairgpu dev` command's screen."""
