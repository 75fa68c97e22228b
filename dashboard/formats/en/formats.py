"""English date formats with the time zone on every datetime.

Django's own English formats print "Jan. 2, 2026, 3:04 a.m." with no zone, so an admin list
of run or alert times does not say whether they are UTC (settings ``TIME_ZONE``) or the
reader's time. These print the zone's abbreviation (``T``: "UTC", "CET") after the time, in
the console's order of year, month, day.
"""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
