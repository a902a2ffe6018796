--- FrogNano for Neovim 0.11+: a thin client of `frognano serve` (LSP over stdio).
---
--- The server does the work (runs pytest, publishes diagnostics, verifies fixes, offers them as
--- code actions); this module only configures `vim.lsp`, keeps the server's `frognano/status`
--- for statuslines and adds a few user commands.
local M = {}

local NAME = "frognano"
local AUTOFIX_MODES = { "off", "suggest", "apply" }
--- The server marks its verified fix with `data.frognano == VERIFIED_FIX` (titles are prose).
local VERIFIED_FIX = "verifiedFix"

--- Defaults; `setup(opts)` deep-merges `opts` into a copy of these.
M.defaults = {
  --- The whole server command (a list, or a `vim.lsp.rpc` function); nil: `<frognano> serve`,
  --- with the executable found by `M.find_server`.
  cmd = nil,
  --- The `frognano` executable (`~` expanded, relative to the project root); nil: look for it.
  server_path = nil,
  filetypes = { "python" },
  root_markers = { "pyproject.toml", "setup.py", "setup.cfg", ".git" },
  --- The `frognano` settings section: model, testArgs, timeout, maxCandidates, maxPairs,
  --- searchSeconds, episodes, python, autoFix ("off"|"suggest"|"apply"), debounceMs.
  settings = {},
}

M.config = vim.deepcopy(M.defaults)

--- Last `frognano/status` params ({state, failing, autoFix, message}) per client id.
local statuses = {}

local function resolve(bufnr)
  return (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
end

local function notify(msg, level)
  vim.notify("FrogNano: " .. msg, level or vim.log.levels.INFO)
end

--- The frognano client attached to `bufnr` (0: current), or nil.
function M.client(bufnr)
  return vim.lsp.get_clients({ bufnr = bufnr or 0, name = NAME })[1]
end

local is_win = vim.fn.has("win32") == 1
local EXE = is_win and "frognano.exe" or "frognano"

--- `frognano` in the virtualenv at `venv`.
local function venv_exe(venv)
  return vim.fs.joinpath(venv, is_win and "Scripts" or "bin", EXE)
end

--- `path` made absolute against `root` (after expanding `~`).
local function absolute(path, root)
  path = vim.fs.normalize(path)
  if root and not vim.startswith(path, "/") and not path:match("^%a:[/\\]") then
    path = vim.fs.joinpath(root, path)
  end
  return path
end

--- `python = "..."` from `[tool.frognano]` of `<root>/pyproject.toml` (a line scan, not TOML).
local function pyproject_python(root)
  local ok, lines = pcall(vim.fn.readfile, vim.fs.joinpath(root, "pyproject.toml"))
  if not ok then
    return nil
  end
  local in_table = false
  for _, line in ipairs(lines) do
    local header = line:match("^%s*%[([^%]]+)%]")
    if header then
      in_table = vim.trim(header) == "tool.frognano"
    elseif in_table then
      local value = line:match([=[^%s*python%s*=%s*["']([^"']+)["']]=])
      if value then
        return value
      end
    end
  end
end

--- The FrogNano checkout this plugin is loaded from (the README installs the server in its
--- `.venv`), or nil when the plugin lives elsewhere.
local function plugin_checkout()
  local source = debug.getinfo(1, "S").source:gsub("^@", "")
  return vim.fs.normalize(vim.fn.fnamemodify(source, ":p")):match("^(.*)/editors/nvim/lua/frognano/init%.lua$")
end

--- Where `frognano` is looked for, in order: `{place, path}` pairs.  `server_path` alone when
--- set; else the project's virtualenv (its pytest and imports), the interpreter the `python`
--- setting names (its console scripts sit beside it), the active virtualenv, PATH, the
--- FrogNano checkout of this plugin, and pip's `--user` directory.
function M.server_candidates(root, settings)
  settings = settings or M.config.settings
  if M.config.server_path then
    return { { "server_path", absolute(M.config.server_path, root) } }
  end
  local out = {}
  local function add(place, path)
    if path and path ~= "" then
      out[#out + 1] = { place, path }
    end
  end
  if root then
    add("the project's .venv", venv_exe(vim.fs.joinpath(root, ".venv")))
    add("the project's venv", venv_exe(vim.fs.joinpath(root, "venv")))
  end
  local python = type(settings) == "table" and settings.python or nil
  if type(python) ~= "string" or python == "" then
    python = root and pyproject_python(root)
  end
  if python then
    add("beside the python setting", vim.fs.joinpath(vim.fs.dirname(absolute(python, root)), EXE))
  end
  if vim.env.VIRTUAL_ENV then
    add("the active virtualenv ($VIRTUAL_ENV)", venv_exe(vim.env.VIRTUAL_ENV))
  end
  add("$PATH", vim.fn.exepath("frognano") ~= "" and vim.fn.exepath("frognano") or "frognano")
  local checkout = plugin_checkout()
  if checkout then
    add("the FrogNano checkout of this plugin", venv_exe(vim.fs.joinpath(checkout, ".venv")))
  end
  add("~/.local/bin", vim.fs.joinpath(vim.fs.normalize("~"), ".local", "bin", EXE))
  return out
end

--- The `frognano` executable for the project at `root` (nil: none), and the places tried.
function M.find_server(root, settings)
  local tried = M.server_candidates(root, settings)
  for _, candidate in ipairs(tried) do
    if vim.fn.executable(candidate[2]) == 1 then
      return candidate[2], tried
    end
  end
  return nil, tried
end

local warned_missing = false

--- Say once per session where `frognano` was looked for; the server is not started.
local function warn_missing(tried)
  if warned_missing then
    return
  end
  warned_missing = true
  local lines = { "cannot find the `frognano` executable, so the server is not started. Looked in:" }
  for _, candidate in ipairs(tried) do
    lines[#lines + 1] = string.format("  %s: %s", candidate[1], candidate[2])
  end
  lines[#lines + 1] = "Install FrogNano there (pip install -e /path/to/frognano), or set "
    .. "`server_path` (or `cmd`) in require(\"frognano\").setup()."
  notify(table.concat(lines, "\n"), vim.log.levels.ERROR)
end

--- The root of `bufnr`'s project; the client starts only when a server command exists.
local function root_dir(bufnr, on_dir)
  local config = vim.lsp.config[NAME] or {}
  local root = vim.fs.root(bufnr, config.root_markers or M.config.root_markers)
  if config.cmd ~= nil and config.cmd ~= M.default_cmd then
    return on_dir(root) -- the user's own command: theirs to get right
  end
  local exe, tried = M.find_server(root, config.settings and config.settings.frognano)
  if exe then
    on_dir(root)
  else
    warn_missing(tried)
  end
end

--- The default command: `<frognano> serve`, the executable found for the client's root.
function M.default_cmd(dispatchers, config)
  local exe = M.find_server(config.root_dir, config.settings and config.settings.frognano) or "frognano"
  return vim.lsp.rpc.start({ exe, "serve" }, dispatchers, { cwd = config.cmd_cwd, env = config.cmd_env })
end

local function on_status(_, result, ctx)
  statuses[ctx.client_id] = result
  vim.api.nvim_exec_autocmds("User", { pattern = "FrogNanoStatus", data = result, modeline = false })
  vim.cmd.redrawstatus({ bang = true })
end

--- Raw `frognano/status` of the client attached to `bufnr` (0: current), or nil.
function M.status_data(bufnr)
  local client = M.client(bufnr)
  return client and statuses[client.id]
end

--- A short statusline string ("" when FrogNano is not attached), e.g. `FrogNano ✗1 fixing`.
--- Use: `vim.o.statusline = "%f %= %{v:lua.require'frognano'.status()}"`.
function M.status(bufnr)
  local client = M.client(bufnr)
  if not client then
    return ""
  end
  local s = statuses[client.id]
  if not s then
    return "FrogNano"
  end
  local parts = { "FrogNano" }
  if type(s.failing) == "number" and s.failing > 0 then
    parts[#parts + 1] = "✗" .. s.failing
  elseif s.state == "passing" then
    parts[#parts + 1] = "✓"
  end
  -- idle/failing/passing are already said; running, fixing, fixed (a fix is ready), error are not.
  if s.state and not vim.list_contains({ "idle", "failing", "passing" }, s.state) then
    parts[#parts + 1] = s.state
  end
  if s.autoFix and s.autoFix ~= "off" then
    parts[#parts + 1] = "autofix:" .. s.autoFix
  end
  return table.concat(parts, " ")
end

--- Code actions of the frognano client for the whole of `bufnr`, passed to `callback(actions)`.
local function code_actions(client, bufnr, callback)
  local diagnostics = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    if d.source == NAME and d.user_data and d.user_data.lsp then
      diagnostics[#diagnostics + 1] = d.user_data.lsp
    end
  end
  local params = {
    textDocument = vim.lsp.util.make_text_document_params(bufnr),
    range = { start = { line = 0, character = 0 }, ["end"] = { line = vim.api.nvim_buf_line_count(bufnr), character = 0 } },
    context = { diagnostics = diagnostics, triggerKind = 1 },
  }
  client:request("textDocument/codeAction", params, function(err, result)
    if err then
      notify("code actions failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return callback({})
    end
    callback(result or {})
  end, bufnr)
end

--- Run `command` ("frognano.fix", ...) for `bufnr`, using the arguments the server put in its own
--- code action when it offered one (so this client never guesses the argument shape).
local function exec(client, bufnr, command, actions)
  for _, a in ipairs(actions or {}) do
    local c = type(a.command) == "table" and a.command or a
    if c.command == command then
      return client:exec_cmd(c, { bufnr = bufnr })
    end
  end
  local uri = vim.uri_from_bufnr(bufnr)
  client:exec_cmd({ title = command, command = command, arguments = { uri } }, { bufnr = bufnr })
end

--- Call `fn(client, bufnr, actions)` with the FrogNano client of `bufnr` (0 or nil: current)
--- and its code actions for the whole buffer; warns when no client is attached.
local function with_actions(bufnr, fn)
  bufnr = resolve(bufnr)
  local client = M.client(bufnr)
  if not client then
    return notify("not attached to this buffer", vim.log.levels.WARN)
  end
  code_actions(client, bufnr, function(actions)
    fn(client, bufnr, actions)
  end)
end

--- Whether `action` is the server's verified fix (not "Fix with FrogNano", which searches).
local function is_verified_fix(action)
  return type(action.data) == "table" and action.data.frognano == VERIFIED_FIX
end

local function apply_action(client, bufnr, action)
  if action.edit then
    vim.lsp.util.apply_workspace_edit(action.edit, client.offset_encoding)
  end
  if type(action.command) == "table" then
    client:exec_cmd(action.command, { bufnr = bufnr })
  end
end

--- Apply the verified fix for `bufnr` when the server offers one, else ask it to search for one.
function M.fix(bufnr)
  with_actions(bufnr, function(client, buf, actions)
    for _, a in ipairs(actions) do
      if is_verified_fix(a) then
        if not a.edit and not a.command and client:supports_method("codeAction/resolve") then
          return client:request("codeAction/resolve", a, function(err, resolved)
            if err or not resolved then
              return notify("could not resolve the fix", vim.log.levels.ERROR)
            end
            apply_action(client, buf, resolved)
          end, buf)
        end
        return apply_action(client, buf, a)
      end
    end
    exec(client, buf, "frognano.fix", actions)
  end)
end

--- Ask the server to run the tests for `bufnr`.
function M.run_tests(bufnr)
  with_actions(bufnr, function(client, buf, actions)
    exec(client, buf, "frognano.runTests", actions)
  end)
end

--- Without `mode`, cycle off -> suggest -> apply on the server (frognano.toggleAutoFix);
--- with one, set it through workspace/didChangeConfiguration.
function M.auto_fix(mode)
  mode = mode ~= "" and mode or nil
  if mode and not vim.list_contains(AUTOFIX_MODES, mode) then
    return notify("autoFix must be one of " .. table.concat(AUTOFIX_MODES, ", "), vim.log.levels.ERROR)
  end
  local clients = vim.lsp.get_clients({ name = NAME })
  if not mode then
    local client = M.client(0) or clients[1]
    if not client then
      return notify("not running", vim.log.levels.WARN)
    end
    return client:exec_cmd({ title = "Toggle auto-fix", command = "frognano.toggleAutoFix", arguments = {} })
  end
  -- Clients started later (other projects) get it too.
  M.config.settings.autoFix = mode
  vim.lsp.config(NAME, { init_options = { autoFix = mode }, settings = { frognano = { autoFix = mode } } })
  for _, c in ipairs(clients) do
    c.settings.frognano = c.settings.frognano or {}
    c.settings.frognano.autoFix = mode
    c:notify("workspace/didChangeConfiguration", { settings = c.settings })
  end
  notify("autoFix = " .. mode)
end

--- Undo the last fix FrogNano applied in the project of `bufnr` (frognano.undoFix: what
--- `frognano undo` does); the buffers then reload from disk.
function M.undo(bufnr)
  bufnr = resolve(bufnr)
  local client = M.client(bufnr)
  if not client then
    return notify("not attached to this buffer", vim.log.levels.WARN)
  end
  local command = { title = "Undo FrogNano fix", command = "frognano.undoFix", arguments = { vim.uri_from_bufnr(bufnr) } }
  client:exec_cmd(command, { bufnr = bufnr }, function(err, result)
    if err then
      return notify("undo failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
    end
    if result and result.undone then
      vim.cmd("checktime")
      return notify("undid the fix in " .. table.concat(result.files or {}, ", "))
    end
    notify((result and result.reason) or "nothing to undo", vim.log.levels.WARN)
  end)
end

local function create_commands()
  local cmd = vim.api.nvim_create_user_command
  cmd("FrogNanoFix", function() M.fix(0) end, { desc = "FrogNano: apply the verified fix, or search for one" })
  cmd("FrogNanoRunTests", function() M.run_tests(0) end, { desc = "FrogNano: run the tests" })
  cmd("FrogNanoUndo", function() M.undo(0) end, { desc = "FrogNano: undo the last fix applied" })
  cmd("FrogNanoAutoFix", function(o) M.auto_fix(o.args) end, {
    nargs = "?",
    complete = function() return AUTOFIX_MODES end,
    desc = "FrogNano: cycle auto-fix, or set it to off|suggest|apply",
  })
end

--- Configure and enable the `frognano` language server.
--- @param opts? {cmd?: string[]|function, server_path?: string, filetypes?: string[], root_markers?: string[], settings?: table}
function M.setup(opts)
  M.config = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts or {})
  -- An empty Lua table is a JSON array to vim.json: `settings = {}` would reach the server as
  -- `[]` and `{"frognano": []}`.  vim.empty_dict() encodes as `{}`, and survives deep copies.
  if next(M.config.settings) == nil then
    M.config.settings = vim.empty_dict()
  end
  local settings = M.config.settings
  vim.lsp.config(NAME, {
    cmd = M.config.cmd or M.default_cmd,
    filetypes = M.config.filetypes,
    root_markers = M.config.root_markers,
    root_dir = root_dir,
    init_options = vim.deepcopy(settings),
    settings = { frognano = vim.deepcopy(settings) },
    handlers = { ["frognano/status"] = on_status },
  })
  vim.lsp.enable(NAME)
  create_commands()
end

return M
