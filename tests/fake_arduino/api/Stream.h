/* Stand-in for ArduinoCore-API's api/Stream.h (tests only; see api/String.h). */
#pragma once

#include <inttypes.h>
#include "Print.h"

namespace arduino {

class Stream : public Print
{
  public:
    virtual int available() = 0;
    virtual int read() = 0;
    virtual int peek() = 0;
};

}

using arduino::Stream;
