// The worker process: `kevolve worker --device N`. Holds one CUDA context, speaks the
// protocol on stdin/stdout, and never writes anything else to stdout.
#pragma once

#include <string>

namespace kevolve {

// Serves requests until "shutdown" or the coordinator closes the pipe. Returns the exit
// status. After a fault that breaks the context it sends the result, then kills itself.
int RunWorker(int device);

// Replays one request read from `request_file` (an encoded "eval" message): every tune
// shape's launches `reps` times, in this process, for a profiler wrapped around it.
int RunReplay(int device, const std::string& request_file, int reps);

}  // namespace kevolve
