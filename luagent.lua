-- luagent.lua: the demo workspace's configuration (this repository).
-- `make run` starts the daemon on this folder; see "Automations and the daemon" in README.md.
return {
  -- site_watch checks http://127.0.0.1:8080/health (a local service, if you run one);
  -- add the hosts of any URL you monitor with the webcheck skill.
  http_allow = { "127.0.0.1" },
  -- `luagent test` runs the *_test.lua files here (skills/<name>/ and
  -- tests/automations/); the rest of tests/ is the C project's own suite.
  test_paths = { "skills", "tests/automations" },
  -- To let site_watch ask a model for a verdict when something goes down, configure a
  -- provider (see the model section of the README), for example a local Ollama:
  -- providers = { { kind = "openai", base_url = "http://127.0.0.1:11434/v1", model = "llama3.1" } },
}
