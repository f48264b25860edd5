// The tests' Arduino "core" on the host (tests only): Serial writes to
// stdout, micros() counts process time, main() runs the sketch's setup()
// and one loop(). Print's members are implemented here as a core's
// Print.cpp would: numbers in the given base, floats with `digits`
// decimals.
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "Arduino.h"

HostSerial Serial;

void HostSerial::begin(unsigned long) {}
void HostSerial::begin(unsigned long, uint16_t) {}
void HostSerial::end() {}
int HostSerial::available(void) { return 0; }
int HostSerial::peek(void) { return -1; }
int HostSerial::read(void) { return -1; }
void HostSerial::flush(void) { fflush(stdout); }
size_t HostSerial::write(uint8_t c) { return fputc(c, stdout) == EOF ? 0 : 1; }
HostSerial::operator bool() { return true; }

namespace arduino {

size_t Print::write(const uint8_t *buffer, size_t size)
{
    size_t n = 0;
    while (size--) n += write(*buffer++);
    return n;
}

static size_t put(Print &p, const char *s) { return p.write((const uint8_t *)s, strlen(s)); }

static size_t number(Print &p, unsigned long long v, int base, bool negative)
{
    char buf[72];
    char *s = buf + sizeof buf - 1;
    if (base < 2) base = 10;
    *s = '\0';
    do {
        int d = (int)(v % (unsigned)base);
        *--s = (char)(d < 10 ? '0' + d : 'A' + d - 10);
        v /= (unsigned)base;
    } while (v);
    if (negative) *--s = '-';
    return put(p, s);
}

size_t Print::print(const char s[]) { return put(*this, s); }
size_t Print::print(char c) { return write((uint8_t)c); }
size_t Print::print(unsigned char v, int base) { return number(*this, v, base, false); }
size_t Print::print(int v, int base) { return print((long)v, base); }
size_t Print::print(unsigned int v, int base) { return number(*this, v, base, false); }
size_t Print::print(long v, int base)
{
    return base == 10 && v < 0 ? number(*this, 0ull - (unsigned long long)v, 10, true)
                               : number(*this, (unsigned long)v, base, false);
}
size_t Print::print(unsigned long v, int base) { return number(*this, v, base, false); }
size_t Print::print(long long v, int base)
{
    return base == 10 && v < 0 ? number(*this, 0ull - (unsigned long long)v, 10, true)
                               : number(*this, (unsigned long long)v, base, false);
}
size_t Print::print(unsigned long long v, int base) { return number(*this, v, base, false); }
size_t Print::print(double v, int digits)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.*f", digits, v);
    return put(*this, buf);
}
size_t Print::println(void) { return put(*this, "\r\n"); }
size_t Print::println(const char s[]) { return print(s) + println(); }

}

unsigned long micros(void) { return (unsigned long)((double)clock() * 1e6 / CLOCKS_PER_SEC); }
unsigned long millis(void) { return micros() / 1000ul; }

void setup(void);
void loop(void);

int main(void)
{
    setup();
    loop();
    return 0;
}
