"""The comparison app: Flask answering 200 without verifying or storing, under the receiver's gunicorn settings."""

from __future__ import annotations

import argparse

from flask import Flask, jsonify

from receiver.gunicorn_app import GunicornApplication, gunicorn_options


def create_bare_app() -> Flask:
    """A Flask app that reads the body and acknowledges it, nothing else."""
    app = Flask(__name__)

    @app.post("/webhooks/partner")
    def receive():
        from flask import request

        request.get_data()
        return jsonify(status="accepted"), 200

    return app


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.receiver.bare")
    parser.add_argument("--bind", required=True)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    options = gunicorn_options(args.bind, args.workers)
    options.pop("on_exit")
    options.pop("when_ready")  # the receiver's master records itself in its database; the bare app has none
    GunicornApplication(create_bare_app, options).run()


if __name__ == "__main__":
    main()
