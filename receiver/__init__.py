"""The webhook receiver: verify -> normalise -> deduplicate -> persist -> 2xx.

`receiver.app:create_app(config)` builds the Flask app; `receiver.signature` and
`receiver.envelope` are its pure core and import no framework.
"""
