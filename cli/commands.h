// Each command registers its CLI11 subcommand and returns the handler to run.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace kevolve::cli {

using Handler = std::function<int()>;

Handler AddOpsCommand(CLI::App& app);
Handler AddCompileCommand(CLI::App& app);
Handler AddRunsCommand(CLI::App& app);
Handler AddShowCommand(CLI::App& app);
Handler AddEvalCommand(CLI::App& app);
Handler AddWorkerCommand(CLI::App& app);
Handler AddDevicesCommand(CLI::App& app);
Handler AddExportCommand(CLI::App& app);
Handler AddMutateCommand(CLI::App& app);
// The main job: options on the top-level app itself (kevolve --op softmax --gens 50).
Handler AddRunOptions(CLI::App& app);

}  // namespace kevolve::cli
