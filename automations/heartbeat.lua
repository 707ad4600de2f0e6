-- heartbeat: a small every-15s automation that shows ctx.state surviving
-- restarts and ctx.last_run: the daemon's pulse in `make run`.

return {
  name = "heartbeat",
  description = "Counts its own runs and reports the gap since the last one",
  every = "15s",
  run = function(ctx)
    ctx.state.beats = (ctx.state.beats or 0) + 1
    local gap = ctx.last_run and string.format("%.1fs", ctx.now - ctx.last_run.time) or "first beat"
    return string.format("beat %d (%s)", ctx.state.beats, gap)
  end,
}
