"""Deploy the scheduler as a Marathon app: `python -m marathon --help`.

`template` renders `marathon/ejcloud-scheduler.json`, `artifact` builds the `.tar.gz` the app
fetches, `client` speaks Marathon's REST API and `deployer` creates or updates the app, waits for
the deployment and asks every instance's `/health` who leads.
"""
