// Status and Result are header-only; this unit keeps the library non-empty and is the
// place for shared helpers if they grow.
#include "kevolve/core/status.h"
