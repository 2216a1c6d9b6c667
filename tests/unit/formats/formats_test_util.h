// Test helper for the formats room: the E_ id a callable throws ("no error" when it returns).
#pragma once

#include <string>

#include "core/error.h"

namespace bloomery::testing {

template <typename F>
std::string error_id(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.id();
  }
  return "no error";
}

}  // namespace bloomery::testing
