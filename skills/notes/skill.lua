-- notes: keep short notes in the workspace (data/notes/<slug>.md) through
-- the fs.* host tools, so they are confined to the workspace's data folder.

local DIR = "notes"

-- "Meeting moved to Friday!" -> "meeting-moved-to-friday"
local function slug(title)
  local s = title:lower():gsub("[^%w]+", "-"):gsub("^-+", ""):gsub("-+$", "")
  if s == "" then error({ code = "invalid_args", message = "the title needs a letter or digit" }) end
  return s:sub(1, 80)
end

local function path_of(title) return DIR .. "/" .. slug(title) .. ".md" end

local function list_files()
  local ok, entries = pcall(tools.call, "fs.list", { path = DIR })
  if not ok then return {} end -- no notes yet
  local names = {}
  for _, e in ipairs(entries) do
    if e.type == "file" and e.name:match("%.md$") then names[#names + 1] = e.name end
  end
  table.sort(names)
  return names
end

return {
  name = "notes",
  description = "Keep workspace notes: write down, append to, read, list, search and delete short text notes",
  keywords = { "note", "notes", "jot down", "write down", "remember", "memo", "to-do list" },
  examples = {
    "write down that the deploy moved to Friday",
    "add a note about the printer password",
    "what did I note about the budget?",
    "list my notes",
    "search my notes for invoices",
  },
  prompt = "Notes are Markdown files in data/notes, one per title. Use notes.search before saying a note does not exist.",
  tools = {
    add = {
      description = "Create a note, or append to the note with the same title",
      params = {
        type = "object",
        required = { "title", "text" },
        additionalProperties = false,
        properties = {
          title = { type = "string", minLength = 1, maxLength = 120 },
          text = { type = "string", minLength = 1, maxLength = 20000 },
        },
      },
      returns = { type = "object", required = { "path", "created" },
                  properties = { path = { type = "string" }, created = { type = "boolean" } } },
      impact = "low",
      run = function(args)
        local path = path_of(args.title)
        local now = tools.call("time.now", {})
        local exists = pcall(tools.call, "fs.read", { path = path })
        local text
        if exists then
          text = "\n" .. now.iso .. ": " .. args.text .. "\n"
        else
          text = "# " .. args.title .. "\n\n" .. now.iso .. ": " .. args.text .. "\n"
        end
        tools.call("fs.write", { path = path, content = text, append = exists })
        return { path = "data/" .. path, created = not exists }
      end,
    },
    read = {
      description = "Read one note by its title",
      params = {
        type = "object",
        required = { "title" },
        properties = { title = { type = "string", minLength = 1, maxLength = 120 } },
      },
      impact = "read",
      run = function(args)
        local r = tools.call("fs.read", { path = path_of(args.title) })
        return { title = args.title, text = r.content }
      end,
    },
    list = {
      description = "List the titles (file names) of all notes",
      params = { type = "object", properties = {} },
      impact = "read",
      run = function()
        return { notes = list_files() }
      end,
    },
    search = {
      description = "Find notes whose text contains the words of a query (case-insensitive)",
      params = {
        type = "object",
        required = { "query" },
        properties = { query = { type = "string", minLength = 1, maxLength = 200 } },
      },
      impact = "read",
      run = function(args)
        local words = {}
        for w in args.query:lower():gmatch("%w+") do words[#words + 1] = w end
        local hits = {}
        for _, name in ipairs(list_files()) do
          local text = tools.call("fs.read", { path = DIR .. "/" .. name }).content
          local lower = text:lower()
          local all = true
          for _, w in ipairs(words) do
            if not lower:find(w, 1, true) then all = false break end
          end
          if all then
            local lines = {}
            for line in text:gmatch("[^\n]+") do
              local l = line:lower()
              for _, w in ipairs(words) do
                if l:find(w, 1, true) then lines[#lines + 1] = line break end
              end
            end
            hits[#hits + 1] = { note = name, lines = lines }
          end
        end
        return { query = args.query, matches = hits }
      end,
    },
    delete = {
      description = "Delete a note by its title",
      params = {
        type = "object",
        required = { "title" },
        properties = { title = { type = "string", minLength = 1, maxLength = 120 } },
      },
      impact = "medium",
      run = function(args)
        tools.call("fs.delete", { path = path_of(args.title) })
        return { deleted = args.title }
      end,
    },
  },
}
