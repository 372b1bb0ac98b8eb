"""The fairgpu API: `uv run main.py` serves it on HOST:PORT (app/api/serve.py; the README)."""

from app.api.serve import main

if __name__ == "__main__":
    main()
