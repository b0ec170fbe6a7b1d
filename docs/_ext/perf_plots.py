def setup(app):
    return {}
