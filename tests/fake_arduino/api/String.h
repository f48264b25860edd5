/* Stand-in for ArduinoCore-API's api/String.h (tests only).

   Every header under tests/fake_arduino/api/ declares a subset of the
   ArduinoCore-API header of the same name (the API the official cores --
   mbed, renesas, arduino-pico, ... -- build on): what the cuvil-mcu
   PlatformIO example uses, and the overloads next to it that take part in
   overload resolution, with the real names and signatures, written for
   these tests. */
#pragma once

namespace arduino {

class __FlashStringHelper;

class String
{
  public:
    String(const char *cstr = "");
};

}
using arduino::__FlashStringHelper;
using arduino::String;
