"""What serves the hooks: rank processes and their lifetime (:mod:`.launcher`, :mod:`.lifetime`), hosts
(:mod:`.hosts`, :mod:`.netns`), CPU quotas (:mod:`.cgroups`), bounded waits (:mod:`.ps_failures`) and the
parameter server's plumbing (:mod:`.ps_config`, :mod:`.ps_protocol`, :mod:`.ps_model`, :mod:`.ps_data`,
:mod:`.batch_manager`). It never imports :mod:`dlsched.hooks` or :mod:`dlsched.jobs`."""
