// kevolve: evolutionary search for fast, correct GPU kernels. This file only wires the
// commands together; each lives in its own cmd_*.cpp.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <exception>
#include <map>

#include "app_context.h"
#include "commands.h"

int main(int argc, char** argv) {
  using namespace kevolve::cli;
  CLI::App app{
      "kevolve: evolutionary search for fast, correct GPU kernels.\n\n"
      "Examples:\n"
      "  kevolve --op softmax --gens 50                 search (needs a GPU)\n"
      "  kevolve ops                                    list ops, dtypes and shapes\n"
      "  kevolve compile --op softmax configs/ops/softmax/seeds/*.cu\n"
      "  kevolve runs --db kevolve.db                   list runs in a database\n"};
  app.set_help_all_flag("--help-all", "Show help for every command");
  app.set_version_flag("--version", std::string("kevolve ") + KEVOLVE_VERSION);
  app.require_subcommand(0, 1);
  app.fallthrough(false);

  std::map<CLI::App*, Handler> handlers;
  Handler run = AddRunOptions(app);
  auto add = [&](Handler (*f)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    Handler h = f(app);
    handlers[app.get_subcommands({}).at(before)] = h;
  };
  add(AddOpsCommand);
  add(AddCompileCommand);
  add(AddRunsCommand);
  add(AddShowCommand);
  add(AddEvalCommand);
  add(AddWorkerCommand);
  add(AddDevicesCommand);
  add(AddExportCommand);
  add(AddMutateCommand);

  if (const char* home = std::getenv("KEVOLVE_HOME"); home != nullptr && *home != '\0') {
    std::error_code ec;
    if (!std::filesystem::is_directory(std::filesystem::path(home) / "configs" / "ops", ec))
      PrintWarning(std::string("KEVOLVE_HOME='") + home + "' has no configs/ops: looking beside the current folder and the binary instead");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e) == 0 ? kExitOk : kExitUsage;  // --help, --help-all
    // One line, like every other error: CLI11's own format is two lines, and it names a
    // command's positional files "files".
    std::string what = e.what();
    if (what.rfind("files: ", 0) == 0) what = what.substr(7);
    std::string help = "kevolve --help";
    for (const CLI::App* sub : app.get_subcommands({}))
      if (sub->parsed()) help = "kevolve " + sub->get_name() + " --help";
    PrintError(what + " (see " + help + ")");
    return kExitUsage;
  }
  try {
    for (auto& [sub, h] : handlers)
      if (sub->parsed()) return h();
    return run();
  } catch (const std::exception& e) {
    // Broken invariants only; expected failures are handled as values in the commands.
    PrintError(std::string("internal error: ") + e.what());
    return kExitFailed;
  }
}
