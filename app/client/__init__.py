"""The `fairgpu` command and the client it is built on: http.py talks to a running service over
HTTP; cli.py is the command (its `dev` subcommand starts a stack with app/dev); commands.py holds
one account's job commands and admin.py the operators' (operators.py their accounts, keys and
audit log; usage.py the usage reports); follow.py follows a job to its end; logs.py and
artifacts.py show what a job says (its log lines) and leaves (its files); render.py is
everything printed for people, in the words of words.py (times, sizes, money); errors.py turns
every failure into one line and an exit code; options.py the options all commands share.
Nothing here imports a server module.
"""
