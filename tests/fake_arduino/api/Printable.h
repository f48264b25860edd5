/* Stand-in for ArduinoCore-API's api/Printable.h (tests only; see api/String.h). */
#pragma once

#include <stdlib.h>

namespace arduino {

class Print;

class Printable
{
  public:
    virtual size_t printTo(Print& p) const = 0;
};

}
