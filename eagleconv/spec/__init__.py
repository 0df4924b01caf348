"""The canonical drafter description every layout is read into and written from, and what is said about it.

``drafter`` (:class:`DrafterSpec`), ``canonical`` (tensor names and the shapes a spec implies), ``config_types``
(the JSON type of each config value), ``vocab`` (the d2t/t2d mapping), ``verifier`` (the target a converted
drafter names) and ``report`` (the typed reports and findings).  Above the architectures, below the layouts.
"""
