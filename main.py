"""The fairgpu API: `uv run main.py` serves it on HOST:PORT (see app/serve.py and the README)."""

from app.api.serve import main

if __name__ == "__main__":
    main()
